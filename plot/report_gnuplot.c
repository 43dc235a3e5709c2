/* Figures drawn by gnuplot: a chart's plot commands run through gnuplot's
 * canvas terminal, whose output (a JavaScript function drawing on a canvas,
 * and the images it links) the page carries; or, when gnuplot is missing or
 * fails, the line that says why. The heatmap and the line chart
 * (plot/report_matrix.c, plot/report_lines.c) draw through here. */
#include "plot/report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tg__gp_text(sbuf *b, const char *s, size_t most)
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

char *tg__gp_figure(tg_report *r, int n, const char *body, int width,
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
