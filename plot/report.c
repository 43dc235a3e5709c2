/* The HTML report (see tapegrad_report.h): the page's frame. Here are the
 * report, its sections' opening and closing, the sections of text (text,
 * pre, table), the tape's section around its figure (plot/report_tape.c)
 * and the page written; the figures' own files build on these helpers
 * (plot/report_matrix.c: heatmap, averaging, attention; plot/report_lines.c:
 * line charts; both draw through plot/report_gnuplot.c), and everything
 * writes its text through plot/report_text.c. plot/report.h draws the
 * floors.
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
#include "core/shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* The report and its sections                                            */
/* ===================================================================== */

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

bool tg__report_check(const char *op, const tg_report *r)
{
    if (!r)
        tg__error("%s: report is NULL", op);
    return r != NULL;
}

bool tg__report_check_tensor(const char *op, const char *what,
                             const tg_tensor *t)
{
    if (!t && !*tg_last_error())
        tg__error("%s: %s is NULL", op, what);
    return t != NULL;
}

void tg__report_open_section(sbuf *b, int n, const char *kind,
                             const char *title)
{
    tg__sb_printf(b,
                  "<section class=\"tg-section\" id=\"fig-%d\" "
                  "data-kind=\"%s\">\n<h2>",
                  n, kind);
    tg__put_html(b, title && *title ? title : kind);
    tg__sb_puts(b, "</h2>\n");
}

int tg__report_add_section(const char *op, tg_report *r, sbuf *b, char *js)
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

void tg__report_data_open(sbuf *b)
{
    tg__sb_puts(b, "<script type=\"application/json\" class=\"tg-data\">");
}

void tg__report_data_close(sbuf *b)
{
    tg__sb_puts(b, "</script>\n</section>\n");
}

/* ===================================================================== */
/* Text, pre, table and the tape                                          */
/* ===================================================================== */

/* The checks and the opening of a section of text (kind "text" or
 * "pre"); false with the error set. */
static bool open_text(const char *op, tg_report *r, const char *kind,
                      const char *heading, const char *text, sbuf *b)
{
    if (!tg__report_check(op, r))
        return false;
    if (!text) {
        tg__error("%s: text is NULL", op);
        return false;
    }
    tg__report_open_section(b, r->n + 1, kind, heading);
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
    return tg__report_add_section(op, r, &b, NULL);
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
    return tg__report_add_section(op, r, &b, NULL);
}

int tg_report_table(tg_report *r, const char *caption, int n_rows, int n_cols,
                    const char *const *cells)
{
    const char *op = "report_table";
    if (!tg__report_check(op, r))
        return -1;
    if (n_rows < 1 || n_cols < 1 || !cells) {
        tg__error("%s: expected n_rows >= 1, n_cols >= 1 and cells, got "
                  "%d x %d%s",
                  op, n_rows, n_cols, cells ? "" : " and NULL cells");
        return -1;
    }
    sbuf b = {0};
    tg__report_open_section(&b, r->n + 1, "table", caption);
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
    return tg__report_add_section(op, r, &b, NULL);
}

int tg_report_tape(tg_report *r, const char *title)
{
    const char *op = "report_tape";
    if (!tg__report_check(op, r))
        return -1;
    sbuf sec = {0}, data = {0};
    tg__report_open_section(&sec, r->n + 1, "tape", title);
    if (!tg__report_tape_body(&sec, &data)) {
        free(sec.p);
        free(data.p);
        return -1;
    }
    tg__report_data_open(&sec);
    tg__sb_puts(&sec, "{");
    tg__sb_putn(&sec, data.p ? data.p : "", data.len);
    tg__sb_puts(&sec, "}");
    tg__report_data_close(&sec);
    if (data.oom)
        sec.oom = true;
    free(data.p);
    return tg__report_add_section(op, r, &sec, NULL);
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
    if (!tg__report_check(op, r))
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
    tg__sb_puts(&b, "</script>\n<script>\n");
    tg__sb_puts(&b, tg__strip_js);
    tg__sb_puts(&b, "</script>\n<script>\n");
    tg__sb_puts(&b, tg__backward_js);
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
    return tg__file_end(out, ok);
}
