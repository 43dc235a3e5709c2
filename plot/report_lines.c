/* Line charts: tg_report_lines. Each series is thinned when it is long,
 * drawn by gnuplot (plot/report_gnuplot.c), and its kept points go into the
 * section's JSON for the page's readout. */
#include "plot/report.h"
#include "plot/tools.h"

#include <math.h>
#include <stdlib.h>

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

/* Every series' kept points: keep[i] the indices thin_series kept (NULL:
 * all of them), kept[i] their count, run[i] the run length (1: whole). */
typedef struct thinned {
    int64_t **keep, *kept, *run;
} thinned;

static void thinned_free(thinned *t, int n)
{
    for (int i = 0; t->keep && i < n; i++)
        free(t->keep[i]);
    free(t->keep);
    free(t->kept);
    free(t->run);
}

/* Thins the n series into t; false (error set, nothing left) when out of
 * memory. */
static bool thin_all(const char *op, const tg_series *s, int n, thinned *t)
{
    t->keep = tg__calloc((size_t)n, sizeof *t->keep);
    t->kept = tg__calloc((size_t)n, sizeof *t->kept);
    t->run = tg__calloc((size_t)n, sizeof *t->run);
    bool oom = !t->keep || !t->kept || !t->run;
    for (int i = 0; !oom && i < n; i++) {
        t->keep[i] = thin_series(&s[i], &t->kept[i], &t->run[i]);
        oom = t->kept[i] < 0;
    }
    if (oom) {
        thinned_free(t, n);
        tg__error("%s: out of memory for %d series", op, n);
        return false;
    }
    return true;
}

/* Series i's q-th kept point's index. */
static int64_t at(const thinned *t, int i, int64_t q)
{
    return t->keep[i] ? t->keep[i][q] : q;
}

/* The checks of tg_report_lines' arguments; false with the error set. */
static bool check_series(const char *op, const tg_series *s, int n, bool logy)
{
    if (!s || n < 1) {
        tg__error("%s: expected at least one series, got %d%s", op, n,
                  s ? "" : " (NULL)");
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (!s[i].y || s[i].n < 1) {
            tg__error("%s: series %d has %s", op, i,
                      s[i].y ? "no points" : "NULL y");
            return false;
        }
        for (int64_t k = 0; logy && k < s[i].n; k++)
            if (!(s[i].y[k] > 0)) {
                tg__error("%s: series %d: y[%lld] = %g on a log axis", op, i,
                          (long long)k, s[i].y[k]);
                return false;
            }
    }
    return true;
}

/* gnuplot's commands for the chart: the axes, each series' finite kept
 * points as a data block, the plot. NULL when out of memory. */
static char *lines_script(const tg_series *s, int n, const thinned *t,
                          const char *xlabel, const char *ylabel, bool logy)
{
    sbuf body = {0};
    /* the key above the chart, outside the data: never over a curve (below,
     * gnuplot puts it on the x axis' title); a series a row, with a line of
     * room more than gnuplot reserves, whose guess of the canvas text's
     * height put the last row on the top border (and the x axis' title a
     * pixel past the bottom edge) */
    tg__sb_printf(&body,
                  "set key above vertical maxrows %d\nset tmargin %d\n"
                  "set bmargin 4\nset grid\nset format y '%%g'\n",
                  n, n + 3);
    if (logy)
        tg__sb_puts(&body, "set logscale y\n");
    tg__sb_puts(&body, "set xlabel ");
    tg__gp_text(&body, xlabel ? xlabel : "x", 80);
    tg__sb_puts(&body, "\nset ylabel ");
    tg__gp_text(&body, ylabel ? ylabel : "y", 80);
    tg__sb_putn(&body, "\n", 1);
    for (int i = 0; i < n; i++) {
        tg__sb_printf(&body, "$s%d << EOD\n", i);
        for (int64_t q = 0; q < t->kept[i]; q++) {
            int64_t k = at(t, i, q);
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
        tg__gp_text(&body, s[i].label ? s[i].label : "", 60);
    }
    tg__sb_putn(&body, "\n", 1);
    return tg__sb_detach(&body);
}

/* A note under the chart for each thinned series. */
static void thin_notes(sbuf *sec, const tg_series *s, int n, const thinned *t)
{
    for (int i = 0; i < n; i++)
        if (t->keep[i]) {
            tg__sb_printf(sec, "<p class=\"tg-note\">Series %d (", i + 1);
            tg__put_html(sec, s[i].label ? s[i].label : "");
            tg__sb_printf(sec,
                          ") thinned from %lld to %lld points: the lowest "
                          "and highest y of each run of %lld.</p>\n",
                          (long long)s[i].n, (long long)t->kept[i],
                          (long long)t->run[i]);
        }
}

/* The series' JSON: "logy" and, per series, its label and kept points. */
static void lines_json(sbuf *sec, const tg_series *s, int n, const thinned *t,
                       bool logy)
{
    tg__sb_printf(sec, ",\"logy\":%s,\"series\":[", logy ? "true" : "false");
    for (int i = 0; i < n; i++) {
        tg__sb_puts(sec, i ? ",{\"label\":" : "{\"label\":");
        tg__put_json(sec, s[i].label ? s[i].label : "");
        tg__sb_puts(sec, ",\"x\":[");
        for (int64_t q = 0; q < t->kept[i]; q++) {
            int64_t k = at(t, i, q);
            if (q)
                tg__sb_putn(sec, ",", 1);
            tg__put_num(sec, s[i].x ? s[i].x[k] : (double)k, false);
        }
        tg__sb_puts(sec, "],\"y\":[");
        for (int64_t q = 0; q < t->kept[i]; q++) {
            if (q)
                tg__sb_putn(sec, ",", 1);
            tg__put_num(sec, s[i].y[at(t, i, q)], false);
        }
        tg__sb_puts(sec, "]}");
    }
    tg__sb_puts(sec, "]}");
}

int tg_report_lines(tg_report *r, const char *title, const tg_series *s, int n,
                    const char *xlabel, const char *ylabel, bool logy)
{
    const char *op = "report_lines";
    if (!tg__report_check(op, r) || !check_series(op, s, n, logy))
        return -1;
    thinned t;
    if (!thin_all(op, s, n, &t))
        return -1;
    tg__c_numbers c = tg__c_numbers_begin();
    int num = r->n + 1;
    char *script = lines_script(s, n, &t, xlabel, ylabel, logy);

    sbuf sec = {0}, data = {0};
    tg__report_open_section(&sec, num, "lines", title);
    char *js =
        script ? tg__gp_figure(r, num, script, 640, 400, &sec, &data) : NULL;
    free(script);
    thin_notes(&sec, s, n, &t);
    tg__sb_puts(&sec, "<div class=\"tg-readout\"></div>\n");
    tg__report_data_open(&sec);
    tg__sb_puts(&sec, "{");
    tg__sb_putn(&sec, data.p ? data.p : "", data.len);
    lines_json(&sec, s, n, &t, logy);
    tg__report_data_close(&sec);
    free(data.p);
    thinned_free(&t, n);
    if (data.oom)
        sec.oom = true;
    tg__c_numbers_end(c);
    return tg__report_add_section(op, r, &sec, js);
}
